"""``hydra/launcher=gpus`` (conf/hydra/launcher/gpus.yaml): Hydra's joblib launcher, whose worker processes end
alone when killed (:mod:`llm.launcher` says why and how)."""

from __future__ import annotations

from collections.abc import Sequence

from hydra.core.utils import JobReturn
from hydra_plugins.hydra_joblib_launcher.joblib_launcher import JoblibLauncher


class GpusLauncher(JoblibLauncher):
    """Hydra's joblib launcher, with its settings. Jobs side by side (``n_jobs`` above 1; the only setting they read)
    run each in a worker process of its own pool (:func:`llm.launcher.launch_isolated`): a worker killed (out of
    memory, ``kill -9``) ends only its job, where joblib's one pool would kill the healthy jobs with it and end the
    sweep with a traceback. One job at a time runs in the sweep's own process, as joblib runs it."""

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from joblib import effective_n_jobs

        from llm.launcher import launch_isolated

        n_jobs = effective_n_jobs(self.joblib.get("n_jobs", -1))
        if n_jobs == 1:
            return super().launch(job_overrides, initial_job_idx)
        return launch_isolated(self, job_overrides, initial_job_idx, n_jobs)

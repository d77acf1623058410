"""ropelab's Hydra launcher plugin (``hydra/launcher=gpus``). Hydra finds launchers only in the ``hydra_plugins``
namespace package, so the class lives here and its work in :mod:`llm.launcher`."""

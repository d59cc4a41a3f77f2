"""mercer: kernel methods that scale, with the scikit-learn API, on CPU and GPU."""

from ._config import Config, config_context, get_config, set_config

__version__ = "0.1.0"

__all__ = ["Config", "__version__", "config_context", "get_config", "set_config"]

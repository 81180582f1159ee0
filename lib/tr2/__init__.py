"""tr2: a GPT training program of hand-written CUDA kernels measured beside PyTorch."""
from pathlib import Path

__version__ = "0.1.0"

# The repository root: lib/tr2/__init__.py -> lib/tr2 -> lib -> root. Editable installs keep this.
REPO_ROOT = Path(__file__).resolve().parents[2]
PARAMS_DIR = REPO_ROOT / "params"
RESULTS_DIR = REPO_ROOT / "results"


class Tr2Error(Exception):
    """An error the user can act on; its message is one line that names the key, value and what is allowed."""

# The servegate client's own tests (python3 -m unittest, in clients/python). They test the installed package when there
# is one (servegate's npm test installs it into a fresh venv first); in a bare checkout they fall back to src/.
import os
import sys

try:
    import servegate  # noqa: F401
except ImportError:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))

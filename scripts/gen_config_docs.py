"""Write docs/config.md from the pydantic config models (``--check``: only compare, exit 1 if stale).

usage: python scripts/gen_config_docs.py [--check] [--output docs/config.md]
The rendering is :mod:`prime_rl.launcher.config_docs`.
"""

from prime_rl.launcher.config_docs import main

if __name__ == "__main__":
    main()

"""``python -m reward COMMAND key=value ...``: every command by name (``perceptual-rewards``, installed), also under
``accelerate launch -m reward COMMAND ...`` (see :mod:`reward.console`)."""

from reward.console import main

if __name__ == "__main__":
    main()

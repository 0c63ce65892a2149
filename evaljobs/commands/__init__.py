"""Click commands that live outside ``evaljobs.cli`` and are registered there with ``main.add_command``."""

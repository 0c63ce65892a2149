"""Entry module for ``dramatiq evaljobs.workerboot``: binds the broker, database and actors from the environment."""
from . import store
from .broker import configure

store.connect()
binding = configure()
broker = binding.broker

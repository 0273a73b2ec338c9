"""A model call streamed through a durable run; ``demo.py`` shows its tokens through a crash."""

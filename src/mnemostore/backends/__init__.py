"""Built-in backends. Each registers under the `mnemostore.backends` entry-point group."""

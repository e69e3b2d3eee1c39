"""rnn.backends (see the package documentation)."""

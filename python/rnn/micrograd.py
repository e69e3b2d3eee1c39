"""rnn.micrograd (see the package documentation)."""

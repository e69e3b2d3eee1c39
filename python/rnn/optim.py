"""rnn.optim (see the package documentation)."""

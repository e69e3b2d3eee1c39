"""rnn.nn (see the package documentation)."""

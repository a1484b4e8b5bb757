"""What every hetflow service shares: server bootstrap, logging, metrics, batching."""

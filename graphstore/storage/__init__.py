"""Storage side of graph-store mode: build the partition, serve sessions, answer fetches."""

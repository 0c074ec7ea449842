"""Graph-store mode: CPU storage servers hold the partitions and serve sampling over RPC (server.py); compute processes join them (compute.py) and read through RemoteDistDataset."""

"""Sizing: how much memory a storage machine needs for a graph, and which machine type fits."""

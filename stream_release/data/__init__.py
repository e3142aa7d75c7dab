"""Bundled data: the UCI Adult data set (CC BY 4.0) and its ARX hierarchies, for the demo."""

"""Evaluation of length extrapolation: suites, their JSON results and figures."""

"""Routing: routes, the semantic and logical selectors, the router retriever over several
sources, route calibration and the prompt router."""

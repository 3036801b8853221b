"""The kopf layer: watches, the work queue and the API calls around the pure core."""

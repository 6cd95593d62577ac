"""The admin dashboard: queues, workers, jobs, learnwares awaiting review, indexes and charts.

``/admin`` is a page (HTML, CSS and a small script, no build step) that signs in with an admin
API key and polls the JSON endpoints under ``/v1/admin/``; every action it offers (retry,
cancel, approve, reject, rebuild) is a call to the dock's own API.
"""

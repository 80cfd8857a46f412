"""The JSON management API: list, inspect, count and cancel entries, list and requeue failed
attempts, read queue statistics, pause and resume queues, and the OpenAPI document of it all.

Include ``django_iq.urls`` in the project's URLconf to serve it (see ``django_iq/api/urls.py``).
"""

"""The operations dashboard: ``views`` (the page and the per-job statistics page, read in a
fixed number of queries), ``panels`` (the leader panel, running entries, the series behind the
charts), ``rows`` (the rows of its tables), ``links`` (the admin list behind each count),
``charts`` (server-side SVG) and ``tags`` (its template tags)."""

"""Job heartbeats: what each django-q2 job did last, for the job-health tiles and `/readyz`."""

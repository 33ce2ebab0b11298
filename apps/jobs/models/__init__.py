from .job import Job, JobEvent

__all__ = ["Job", "JobEvent"]

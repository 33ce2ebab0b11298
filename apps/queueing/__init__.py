"""Queueing: queues with GPU/CPU/memory quota per tenant, cohorts that share idle quota, priority classes,
and GPU reservations. The admission cycle reads these and writes each queue's status.
"""

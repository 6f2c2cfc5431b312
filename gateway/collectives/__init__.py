"""Gather and all_gather (collectives.md): `Collectives` at the requester, `Responder` at
each asked member, both posting through the narrow `PostingPort`, and their durable rows.
"""

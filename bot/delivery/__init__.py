"""Delivery stage: ``loop`` claims due digests, sends them and records each outcome;
``smtp`` talks SMTP (aiosmtplib) and only classifies what came back.  Never renders.
"""

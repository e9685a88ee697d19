# digestbot: one image for every role (scheduler, worker, run, migrations).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    DIGESTBOT_PATHS__VAR_DIR=/data/var \
    DIGESTBOT_PATHS__DUMP_DIR=/data/dumps

WORKDIR /app
COPY pyproject.toml setup.py MANIFEST.in README.md constraints.txt ./
COPY bot ./bot
COPY templates ./templates
COPY config ./config
# The wheel carries the templates and the default tag rules (bot/shipped_files/); the
# versions are CI's (constraints.txt).
RUN pip install --no-cache-dir --constraint constraints.txt '.[postgres,taste]'

RUN useradd --system --uid 10001 digestbot \
    && mkdir -p /data/var /data/dumps \
    && chown -R digestbot /data
USER digestbot
VOLUME ["/data/var", "/data/dumps"]

ENTRYPOINT ["digestbot", "--config", "/app/config/digestbot.toml"]
CMD ["run"]

# One image for every Airlock role: api, worker, beat, migrate.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app

COPY pyproject.toml README.md alembic.ini ./
COPY loop ./loop
COPY persistence ./persistence
COPY providers ./providers
COPY workers ./workers
COPY alembic ./alembic
RUN pip install -e . && useradd --create-home airlock
USER airlock

EXPOSE 8000
CMD ["airlock", "api", "--host", "0.0.0.0", "--port", "8000"]

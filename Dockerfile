# One image for every Airlock role: api, worker, beat, migrate. The first stage builds
# the wheel; the second installs only the wheel (the migrations ship inside it), so the
# image runs Airlock as `pip install airlock-*.whl` does, from any folder.
FROM python:3.11-slim AS build

ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
# airlock/ links to the folders beside it (airlock/loop -> ../loop, …, migrations -> ../alembic)
COPY airlock ./airlock
COPY alembic ./alembic
COPY loop ./loop
COPY persistence ./persistence
COPY providers ./providers
COPY workers ./workers
RUN pip wheel --no-deps --wheel-dir /wheels .

FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    AIRLOCK_HOME=/var/lib/airlock \
    PYTHONPATH=/opt/airlock-agents
COPY --from=build /wheels /wheels
RUN pip install /wheels/*.whl && rm -rf /wheels \
    && useradd --create-home --home-dir /home/airlock --shell /usr/sbin/nologin airlock \
    && mkdir -p /var/lib/airlock /opt/airlock-agents \
    && chown airlock:airlock /var/lib/airlock
USER airlock
WORKDIR /home/airlock

EXPOSE 8000
CMD ["airlock", "api", "--host", "0.0.0.0"]

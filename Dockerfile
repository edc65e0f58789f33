# The logway broker image: `docker build -t logway .`, run by docker-compose.yml.
#   docker run --network host logway --config /etc/logway/server.properties --override broker.id=1 ...
FROM python:3.11-slim

WORKDIR /opt/logway
COPY pyproject.toml README.md ./
COPY broker broker
COPY coordinator coordinator
COPY protocol protocol
COPY replication replication
COPY storage storage
RUN pip install --no-cache-dir . && rm -rf /opt/logway/*

COPY config/server.properties /etc/logway/server.properties
RUN useradd --system --home-dir /var/lib/logway logway \
    && mkdir -p /var/lib/logway && chown logway /var/lib/logway
USER logway
WORKDIR /var/lib/logway
VOLUME /var/lib/logway
EXPOSE 9092

ENTRYPOINT ["logway"]
CMD ["--config", "/etc/logway/server.properties", "--override", "log.dirs=/var/lib/logway"]

# The logway broker image: `docker build -t logway .`, run by docker-compose.yml.
#   docker run --network host logway --config /etc/logway/server.properties --override broker.id=1 ...
# The wheel is built where gcc is (LOGWAY_COMPILE=1: setup.py compiles the request path's modules
# with mypyc), and installed into the slim image, which has no compiler.
FROM python:3.11 AS build
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY broker broker
COPY coordinator coordinator
COPY protocol protocol
COPY replication replication
COPY storage storage
RUN LOGWAY_COMPILE=1 pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM python:3.11-slim
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels

COPY config/server.properties /etc/logway/server.properties
RUN useradd --system --home-dir /var/lib/logway logway \
    && mkdir -p /var/lib/logway && chown logway /var/lib/logway
USER logway
WORKDIR /var/lib/logway
VOLUME /var/lib/logway
EXPOSE 9092

ENTRYPOINT ["logway"]
CMD ["--config", "/etc/logway/server.properties", "--override", "log.dirs=/var/lib/logway"]

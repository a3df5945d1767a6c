# The Recipe Advisor HTTP service. Serving needs no torch: `pip install .` without extras.
#   docker build -t recipe-advisor .
#   docker run --rm -p 8000:8000 recipe-advisor
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY service ./service
COPY recipe_index ./recipe_index
COPY trainer ./trainer
COPY templates ./templates
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels . \
 && pip wheel --no-cache-dir --wheel-dir /wheels /wheels/recipe_advisor-*.whl

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links /wheels recipe-advisor \
 && rm -rf /wheels \
 && useradd --system --uid 10001 --no-create-home advisor
USER advisor
WORKDIR /tmp
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=3s CMD python -c "import urllib.request,sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2).status != 200)"
# Inside a container the service must listen on all interfaces; publish the port to choose who reaches it.
# Two workers per container; scale further with replicas behind the proxy (the app is stateless).
CMD ["recipe-advisor", "serve", "--host", "0.0.0.0", "--port", "8000", "--workers", "2"]

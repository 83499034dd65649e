"""The HTTP server under the routes: it knows no route, no program and no registry.

Here: the protocol uvicorn runs (request-head and body deadlines, header limits), the request
cycle that splices bodies into files and sends answers from files, request bodies streamed to
files, byte ranges, spliced answers, the refusal of requests a stopping server cancels, and the
problem answers (RFC 9457) every layer's failure reaches the client as. The catalogue of problem
codes lives here rather than beside the routes because the machinery answers with it too (408
deadlines, 413 bodies, 416 ranges, 503 a stop) and must not import upward; the routes and their
handlers import it from here.
"""

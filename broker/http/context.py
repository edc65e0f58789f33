"""What the route handlers find in the aiohttp application: the broker's HttpApi."""

from aiohttp import web

API = web.AppKey("api", object)
# The request's principal: User:<name> under basic authentication, else User:ANONYMOUS.
PRINCIPAL = web.RequestKey("principal", object)

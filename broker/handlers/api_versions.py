"""ApiVersions (api key 18), versions 0-3.

Lists every API this broker serves with its version range, straight from the handler registry,
so the answer cannot drift from what is served. v3 requests carry the client's software name and
version (not used). The response always goes out with response header v0, even for v3, and a
request of a version above 3 is answered UNSUPPORTED_VERSION in the v0 layout (see
broker.dispatch): that is how clients learn which version to retry with.
"""

import datetime

from kio.schema.api_versions.v3.response import ApiVersion, ApiVersionsResponse

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode

from broker.handlers.registry import HANDLERS, RequestContext, api


@api(ApiKey.API_VERSIONS, versions=(0, 3))
def handle_api_versions(ctx: RequestContext, request) -> ApiVersionsResponse:
    return ApiVersionsResponse(
        error_code=ErrorCode.none,
        api_keys=tuple(
            ApiVersion(api_key=h.api_key, min_version=h.min_version, max_version=h.max_version)
            for h in sorted(HANDLERS.values(), key=lambda h: h.api_key)
        ),
        throttle_time=datetime.timedelta(0),
    )

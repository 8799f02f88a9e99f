package h1server

import "coxswain.dev/coxswain/proxy/internal/dataplane/http1"

// The codec's parts the server uses.
type (
	headRequest   = http1.Request
	chunkedReader = http1.ChunkedReader
)

var parseRequest = http1.ParseRequest

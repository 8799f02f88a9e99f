package wellknown

// The HTTP/1.1 engines of the proxy (its --http1-engine flag), which the operator renders into
// the proxies it provisions from CoxswainConfig spec.proxy.http1Engine and
// CoxswainGatewayParameters spec.http1Engine.
const (
	// HTTP1EngineNative is the proxy's own strict HTTP/1.1 codec and upstream client.
	HTTP1EngineNative = "native"
	// HTTP1EngineNetHTTP is Go's net/http server and Transport.
	HTTP1EngineNetHTTP = "nethttp"
	// HTTP1EngineFlag is the proxy's flag that selects the engine.
	HTTP1EngineFlag = "--http1-engine"
)

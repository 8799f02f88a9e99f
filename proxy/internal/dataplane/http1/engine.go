package http1

import (
	"fmt"

	"coxswain.dev/coxswain/discovery/wellknown"
)

// Engine names the implementation that serves HTTP/1.1 on the proxy's listeners and speaks it
// to backends: the proxy's --http1-engine flag.
type Engine string

const (
	// EngineNetHTTP is Go's net/http server and Transport.
	EngineNetHTTP Engine = wellknown.HTTP1EngineNetHTTP
	// EngineNative is this package's codec, with the native server and upstream client.
	EngineNative Engine = wellknown.HTTP1EngineNative
	// DefaultEngine is the engine of a proxy that does not name one.
	DefaultEngine = EngineNative
)

// Engines lists the engines in the order the flag's help shows them.
var Engines = []Engine{EngineNative, EngineNetHTTP}

// ParseEngine returns the engine s names; the empty string is DefaultEngine.
func ParseEngine(s string) (Engine, error) {
	switch e := Engine(s); e {
	case "":
		return DefaultEngine, nil
	case EngineNative, EngineNetHTTP:
		return e, nil
	}
	return "", fmt.Errorf("http1: unknown engine %q (want %q or %q)", s, EngineNative, EngineNetHTTP)
}

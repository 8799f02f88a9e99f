package discoveryv1

// WireVersion is the version of the discovery protocol spoken by this build. It is carried by
// BootstrapRequest and Subscribe; both ends must agree exactly, and a server answers any other
// value with FAILED_PRECONDITION. This constant is its only definition.
const WireVersion uint32 = 1

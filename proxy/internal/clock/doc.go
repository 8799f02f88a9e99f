// Package clock is the time source of the proxy's control-channel side: the agent's backoff and
// SVID renewal timers and the health tracker's ages read it, so tests drive time with a Fake
// instead of sleeping.
package clock

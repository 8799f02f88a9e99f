// Package connlimit caps the connections a discovery listener holds, in total and per source
// address, closing those beyond at accept before any TLS work; it can hold slots in reserve for
// connections whose handshake verified a client certificate (Conn.Settle); it gives a shorter handshake
// deadline to connections accepted while the listener is busy, can close connections that saw
// no call that counts for a while, and finds a connection by its addresses so a handler can
// close it.
package connlimit

// Package listener binds the data plane's ports: one socket per port of the routing table,
// served by net/http's server for HTTP/1.1 and HTTP/2 (h2c with prior knowledge on plain ports,
// h2 through ALPN on HTTPS ports), with the connection, header, timeout and HTTP/2 limits of
// Options. Certificates are chosen per handshake from the table serving at that moment (SNI
// exact hostname, then wildcard, then the port's default), so certificate changes need no
// rebind. Ports are bound before a table is swapped in and released after.
package listener

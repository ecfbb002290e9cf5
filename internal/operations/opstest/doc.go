// Package opstest is what a Company's origin, its approval hook and a
// Personal Agent do in the tests of the Operations extension (extension
// 4, 6, 7) at the platform's interfaces: the API proxy, the hosted MCP
// server and the website proxy. It is for tests only.
package opstest

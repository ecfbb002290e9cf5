// Package agentid resolves a Personal Agent's identity (spec 4.1): it
// fetches the client metadata document at its client_id (CIMD, without
// following redirects) and the key set at its jwks_uri, validates both, and
// caches them. It also decides whether a Company accepts a Personal Agent.
//
// "Same domain" (4.1) means the same registrable domain: the jwks_uri and
// redirect_uris hosts must have the client_id host's eTLD+1 (public suffix
// list), so https://keys.agent.example may serve the keys of
// https://agent.example/agent.json. A client_id whose host is an IP address
// needs the exact same host.
package agentid

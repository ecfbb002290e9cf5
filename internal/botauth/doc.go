// Package botauth verifies Web Bot Auth signatures (spec 5.3; the Web Bot
// Auth architecture and HTTP Message Signatures Directory drafts on top of
// RFC 9421) so that poppyhost, as its Companies' traffic manager, can
// recognise the operator of a Personal Agent.
//
// A request is signed when it carries a signature tagged "web-bot-auth".
// Verifier.Verify then requires created and expires within a bounded
// window, covered components including @authority (and signature-agent
// when the Signature-Agent header is present), a keyid that is the RFC 7638
// JWK thumbprint of a key in the key directory the Signature-Agent header
// names (/.well-known/http-message-signatures-directory, fetched through
// package safehttp and cached), and a nonce, when present, not seen before
// within the window. The verified operator is the directory's host.
//
// Recognising the operator verifies no Session claim and authorizes
// nothing (spec 2): callers decide what a missing or bad signature costs.
package botauth

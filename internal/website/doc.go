// Package website is the website proxy: every path of a Company domain
// that the platform does not serve itself goes to the Company's
// web.origin (DESIGN.md, "Hosts and routes"), with Poppy-Verified for a
// browser joined to a Personal Agent's Session (spec 6, step 4), the
// Company's scope rules, and its operations (extension 4, 6, "Websites";
// spec 8.2), approved by the Personal Agent at {issuer}/poppy/operations.
// Its own answers to a browser are one page, page.html. It reaches the
// origin through internal/origin.
package website

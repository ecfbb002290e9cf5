// Package chrome starts headless Chromium for tests that drive the
// platform's HTML pages (DESIGN.md, Tests): the sign-in and consent pages
// as a User's browser sees them.
//
// Chromium comes from POPPYHOST_CHROMIUM, else chromium or chromium-browser
// on PATH; .ci/run installs Debian's chromium. Without one the test fails,
// except under -short, where it is skipped.
package chrome

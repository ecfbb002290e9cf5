package tenant

import "net/url"

// DecodeCompany reads a Company body as the admin API does, strictly on
// top of the defaults, for tables that check Validate without HTTP.
func DecodeCompany(raw []byte) (slug string, s Settings, err error) {
	b, err := decodeCompany(raw)
	return b.Slug, b.Settings, err
}

// MergePatch applies patch to c as PATCH of a Company does, for the fuzz
// target of merge patches.
func MergePatch(c *Company, patch []byte, publicHost string) (Settings, error) {
	a := &Admin{allowPrivate: true}
	a.urls.Public = &url.URL{Scheme: "https", Host: publicHost}
	return a.mergePatch(c, patch)
}

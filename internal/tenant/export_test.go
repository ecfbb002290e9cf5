package tenant

// DecodeCompany reads a Company body as the admin API does, strictly on
// top of the defaults, for tables that check Validate without HTTP.
func DecodeCompany(raw []byte) (slug string, s Settings, err error) {
	b, err := decodeCompany(raw)
	return b.Slug, b.Settings, err
}

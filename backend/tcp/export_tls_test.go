package tcp

// TLSCreds is tlsCreds, for the external tests.
var TLSCreds = tlsCreds

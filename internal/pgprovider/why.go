package pgprovider

import "fmt"

func whyNotDatabase(provision string) string {
	return fmt.Sprintf("%s provides only %q provisions, not %q", Module, Provision, provision)
}

func whyNoCredential(key string) string {
	return fmt.Sprintf("the provision %s depends on no credential: postgres' database offer must say credential own", key)
}

func whyUnreachable(err error) string {
	return fmt.Sprintf("waits for the PostgreSQL server to be reached: %v", err)
}

func whyNoVault(err error) string {
	return fmt.Sprintf("waits for mesh-vault to answer the consumer's credential: %v", err)
}

module apicount

go 1.21

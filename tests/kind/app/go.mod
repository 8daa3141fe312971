module kube-reloader.local/kind-app

go 1.26

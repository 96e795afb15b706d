# Sources of models, optimizers, data, traces and the cell runner (list them relative to sim/).

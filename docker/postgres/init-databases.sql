-- Run by the official postgres image on the first start with an empty data volume only
-- (as the POSTGRES_USER role). Alembic migrates each database: MLflow's tracking store and
-- its basic-auth store, Optuna's storage and the autotune job store must not share one,
-- since their migration histories would collide.
CREATE DATABASE autotune_jobs;
CREATE DATABASE autotune_optuna;
CREATE DATABASE autotune_mlflow;
CREATE DATABASE autotune_mlflow_auth;

# Install sapo-edge on Windows with uv: no C compiler (no MSVC Build Tools), the CPU build of
# torch unless an NVIDIA GPU is present (uv --torch-backend auto), Python fetched by uv if the
# machine has none. Then fetch the offline model and check the machine.
#
#   powershell -ExecutionPolicy Bypass -File install.ps1
#   $env:SAPO_EDGE_SPEC = ".\dist\sapo_edge-0.1.0-py3-none-any.whl"; .\install.ps1   # a local wheel
#   $env:SAPO_EDGE_NO_MODEL = "1"; .\install.ps1   # skip the offline model (98 MB)
$ErrorActionPreference = "Stop"

$Spec = if ($env:SAPO_EDGE_SPEC) { $env:SAPO_EDGE_SPEC } else { "sapo-edge" }
$Python = if ($env:SAPO_EDGE_PYTHON) { $env:SAPO_EDGE_PYTHON } else { "3.12" }

if (-not (Get-Command uv -ErrorAction SilentlyContinue)) {
    Write-Host "uv is not installed. Install it first, then run this script again:"
    Write-Host '  winget install --id=astral-sh.uv -e      (or: powershell -c "irm https://astral.sh/uv/install.ps1 | iex")'
    exit 1
}

# reasoning-gym pins pycosat, which PyPI has only as C source: leave it out (sapo-edge carries a
# pure-Python stand-in that builds the same questions).
$Excludes = New-TemporaryFile
try {
    Set-Content -Path $Excludes -Value "pycosat" -Encoding ascii
    uv tool install --force --python $Python --torch-backend auto --excludes $Excludes $Spec
    if ($LASTEXITCODE -ne 0) { exit $LASTEXITCODE }
} finally {
    Remove-Item $Excludes -ErrorAction SilentlyContinue
}

$Bin = (uv tool dir --bin)
if (-not (($env:PATH -split ";") -contains $Bin)) {
    Write-Host "note: $Bin is not on your PATH: run 'uv tool update-shell' and open a new terminal."
    $env:PATH = "$Bin;$env:PATH"
}

if (-not $env:SAPO_EDGE_NO_MODEL) {
    sapo-edge models --get smollm2-135m
}
sapo-edge doctor
if ($LASTEXITCODE -ne 0) { Write-Host "sapo-edge doctor found something to fix (see the FAIL lines above)." }
Write-Host "Installed. Start with: sapo-edge   (or: sapo-edge sim --preset demo)"
